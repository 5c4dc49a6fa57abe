"""Views that send mail the ways Django apps do: send_mail, EmailMessage, a connection's batch."""

from email.mime.image import MIMEImage
from pathlib import Path

from django.core import mail
from django.core.mail import EmailMessage, EmailMultiAlternatives, send_mail
from django.http import HttpRequest, JsonResponse

from outbox.client import FieldErrors

# A PNG's signature and some bytes no text encoding leaves alone.
IMAGE = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
TERMS = Path(__file__).with_name("terms.txt")


def welcome(request: HttpRequest) -> JsonResponse:
    sent = send_mail("Welcome", "Hello ✓", None, ["Zoë <zoe@example.com>"],
                     html_message="<p>Hello ✓</p>")  # fmt: skip
    return JsonResponse({"sent": sent})


def order(request: HttpRequest) -> JsonResponse:
    """An order confirmation with everything, and an html notice, queued in one batch."""
    confirmation = EmailMultiAlternatives(
        "Order 42", "Your order ships.", "Orders <orders@example.com>",
        ["buyer@example.com"], bcc=["audit@example.com"], cc=["partner@example.com"],
        reply_to=["help@example.com"], headers={"X-Order": "42", "Message-ID": "<x@shop>"},
    )  # fmt: skip
    confirmation.attach_alternative("<p>Your order <b>ships</b>.</p>", "text/html")
    confirmation.attach("invoice.pdf", IMAGE[::-1], "application/pdf")
    confirmation.attach("note.txt", "merci ✓\n")
    logo = MIMEImage(IMAGE, "png")
    logo.add_header("Content-ID", "<logo>")
    logo.add_header("Content-Disposition", "inline", filename="logo.png")
    confirmation.attach(logo)
    confirmation.attach_file(TERMS)
    notice = EmailMessage("Stock low", "<p>Only 2 left</p>", to=["staff@example.com"])
    notice.content_subtype = "html"
    nobody = EmailMessage("Nobody", "skipped: no recipient")
    with mail.get_connection() as connection:
        sent = connection.send_messages([confirmation, nobody, notice])
    return JsonResponse({"sent": sent})


def broken(request: HttpRequest) -> JsonResponse:
    """A message the API refuses: quietly with fail_silently, else its fields named."""
    silent = send_mail("Bad", "x", None, ["not an address"], fail_silently=True)
    try:
        send_mail("Bad", "x", None, ["not an address"])
    except FieldErrors as exc:
        return JsonResponse({"silent": silent, "fields": exc.fields})
    return JsonResponse({"silent": silent, "fields": None})

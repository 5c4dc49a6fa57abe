"""The demo's own DNS server: the records of its domain on loopback, so that the Domains page
has verdicts to show on a machine with no DNS of its own for that domain."""

import socket
import threading

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

# What a sending domain publishes: SPF for the demo's server, a monitoring DMARC policy and
# an MX. No DKIM key: the Domains page shows a warning and the command that adds one.
ZONE = {
    ("demo.example.", "TXT"): ['"v=spf1 ip4:127.0.0.1 -all"'],
    ("demo.example.", "MX"): ["10 mail.demo.example."],
    ("mail.demo.example.", "A"): ["127.0.0.1"],
    ("_dmarc.demo.example.", "TXT"): ['"v=DMARC1; p=none; rua=mailto:dmarc@demo.example"'],
}
NAMES = {name for name, _ in ZONE}


def answer(query: dns.message.Message) -> dns.message.Message:
    """The authoritative answer to one question from ZONE: the records, none, or NXDOMAIN."""
    response = dns.message.make_response(query)
    response.flags |= dns.flags.AA
    for question in query.question:
        name = question.name.to_text().lower()
        kind = dns.rdatatype.to_text(question.rdtype)
        records = ZONE.get((name, kind))
        if records:
            response.answer.append(dns.rrset.from_text(question.name, 300, "IN", kind, *records))
        elif name not in NAMES:
            response.set_rcode(dns.rcode.NXDOMAIN)
    return response


class Server:
    """ZONE served over UDP on a port the OS picks, from a thread of its own."""

    def __init__(self, host: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(1.0)  # how soon stop() is noticed
        self.address = f"{host}:{self.sock.getsockname()[1]}"
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="demo-dns", daemon=True)

    def start(self) -> "Server":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join()
        self.sock.close()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                data, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            try:
                query = dns.message.from_wire(data)
            except dns.exception.DNSException:
                continue  # not a DNS question: no answer, as a server would
            self.sock.sendto(answer(query).to_wire(), peer)

"""Writing a mail: a stored row as the bytes an SMTP server takes (headers, parts, encodings)
and their DKIM signature, with the keys passed in.
"""

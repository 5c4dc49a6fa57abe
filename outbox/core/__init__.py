"""The facts everything else shares, with no database and no app: statuses and their moves,
each recipient's delivery, addresses, the message's schema and checks, roles, logging.
"""

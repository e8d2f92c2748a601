"""The egress jail: the namespace holder, pasta, the relays and the route lock."""

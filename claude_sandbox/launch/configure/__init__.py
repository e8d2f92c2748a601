"""The launch's first stage: the operator's configuration, the agents' profiles, the request.

It reads /etc/claude-sandbox.conf and the launching environment, nothing else of the host.
"""

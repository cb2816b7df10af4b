"""NATS's client protocol as the JetStream spout speaks it; each module imports only the one
above it, and this package imports neither:

    wire            the protocol's frames: parse what the server sends, build what the client does; NatsError
    connection      one connection: made on a thread that may wait, then driven without waiting
"""

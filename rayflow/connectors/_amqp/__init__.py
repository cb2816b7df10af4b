"""AMQP 0-9-1 as the RabbitMQ spout speaks it, one concern per module; each imports only the
ones listed above it, and this package imports none of them:

    errors          AmqpError and its kinds (lost, closed by the broker, consumer cancelled)
    codec           frames in and out: pika's spec, frame and data modules, the ack frames by hand
    handshake       opening a connection, channel 1 and the queue (waits: off the task's thread)
    consumer        QueueConsumer: deliveries off a non-blocking socket, acks written without waiting
    ack_watermark   which delivery tags one ack may settle (bookkeeping, no I/O)
"""

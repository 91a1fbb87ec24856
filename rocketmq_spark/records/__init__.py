"""Message records of a pull answer to messages and Arrow columns. No I/O.

``decoder.PullDecoder`` is the one place that picks how a pull body is decoded: in bulk
(``columnar``) when every record fits the common layout, else record by record (``walk``).
"""

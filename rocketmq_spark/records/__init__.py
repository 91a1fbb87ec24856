"""Message records both ways, and Arrow columns. No I/O.

Reading: ``decoder.PullDecoder`` is the one place that picks how a pull body is decoded: in bulk
(``columnar``) when every record fits the common layout, else record by record (``walk``), into
the columns of ``columns``, by the record layout of ``layout``; ``properties``, ``compression``
and ``hosts`` read a record's parts.
Writing: ``outgoing`` encodes a message's properties and a batch send's records one by one, and
``outgoing_batch`` cuts a whole Arrow batch's records at once.
"""

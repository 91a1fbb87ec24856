"""The option vocabulary that reading and writing share: the error that names an option and its
fix, typed access to Spark's option strings, and the connection options (name servers, ACL
credentials, TLS, the request timeout, the namespace, the retry budget) turned into what the
layers below take: a ``ClientConfig`` and a ``Retry``.

Below this floor nothing names an option; ``source`` (and a sink beside it) name their own.
"""

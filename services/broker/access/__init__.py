"""Access control and client limits of the broker (docs/security.md).

``acl_file`` (the document), ``resources`` (what each call needs),
``authorizer`` (signature and rights checks), ``stream_access`` (the same
checks for each message of a SendStream), ``acl_table`` (the document in
force, kept in the store), ``acl_admin`` (GetAcl / UpdateAcl) and ``gate``
(the server interceptor that applies them and the per-client rate and
in-flight caps of :mod:`boltmq.kernel.caller_limits`).
"""

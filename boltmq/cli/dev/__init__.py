"""Development tooling: the local cluster, the service launcher, dev certificates
and the StatefulSet member helper."""

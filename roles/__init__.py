"""The processes of a deployment (the Helm chart's roles): `fedlab source`, `warehouse`, `load`, `chaos-k8s`."""

"""The deployment tests: installing (pip, the OCI image), the CLI and tritonserver's command lines, ports and
CPUs, load balancers in front of replicas, SuperSONIC's values and Prometheus queries, packaging, the
project's promises (README, docs).
"""

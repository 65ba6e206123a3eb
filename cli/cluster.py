"""The Kubernetes API client of the `kpi-forecast k8s` commands (kubernetes: in the serve and
train extras)."""

from __future__ import annotations

import argparse
from pathlib import Path


def kubernetes_client(args: argparse.Namespace):  # -> kubernetes.client.ApiClient
    from kubernetes import config

    if args.kubeconfig or not Path("/var/run/secrets/kubernetes.io/serviceaccount").exists():
        return config.new_client_from_config(config_file=args.kubeconfig, context=args.context)
    config.load_incluster_config()
    from kubernetes import client

    return client.ApiClient()

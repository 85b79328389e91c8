"""Workloads, trigger populations, the provider simulation and the polling processor."""

"""kvtune: honest auto-tuning of memcached, Redis and the Linux host under them."""

__version__ = "0.1.0"

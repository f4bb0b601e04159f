"""Load drivers: kvload (open loop, coordinated-omission corrected) and, later, adapters."""

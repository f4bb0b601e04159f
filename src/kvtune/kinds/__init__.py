"""The server kinds, one folder each (`kinds/<kind>/`): everything specific to one server.
Their registry is `kvtune.kind_registry` (one line a kind), below the generic layers that
ask it; the folders sit above them and are imported through it, on first use."""

"""Several processes sharing one study (docs/fleet.md): `claims` (who measures what, the
heartbeats, the baseline and confirmation claims, in the study's storage) and `worker`
(the search strategy of a fleet worker, plugged into the study run)."""

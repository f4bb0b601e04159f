"""The library of what kvtune has learned (issue 33): one entry per finished study,
keyed by its workload's features (`features`), kept in SQLite or PostgreSQL (`store`);
the past studies that speak to a new one (`nearest`), its warm start (`warm`), the
categories of workloads and their profiles (`profiles`, `export`), and predictions from
the library alone (`predict`). docs/library.md is the manual."""

"""Workload models of real traffic: captured from a live server (`capture`), imported from
public traces (`traces`), described (`describe`). A model is a kvload workload file
(`model`), replayed by kvload and used by studies through `load.workload_file`."""

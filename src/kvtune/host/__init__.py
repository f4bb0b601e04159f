"""The host under test: facts about this machine and the journal through which every write goes."""

"""Test helpers: the one home of what tests share (servers, studies, the CLI, screens).
Test modules import from here, never from another test module."""

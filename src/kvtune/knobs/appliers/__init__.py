"""Appliers: one base (`base.Applier`), one module per family of knobs."""

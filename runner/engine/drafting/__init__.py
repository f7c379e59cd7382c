"""Everything that drafts or verifies drafts: the drafter interface and its two
implementations (the MTP layer, chained; the block drafter with its per-row context), the
draft policy that decides each row's draft length and its cost model, and verification of
a landed pass (accepted prefixes, rollback lengths). The engine's core (engine, launch,
forward, scheduler) imports these; they read the core's model, cache, layout, sequence and
sampler. No module of either is in an import circle (a test checks).
"""

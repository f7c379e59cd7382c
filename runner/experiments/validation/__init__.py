"""A declaration's rules, key by key: the experiment's top-level keys and arms
(`experiment.py`), its `[workload]` table (`workload.py`) and its arrivals
(`arrivals.py`). Each returns the problems it finds, never raises and knows no file
names; `experiments/declaration.py` reads the file and reports them together.
"""

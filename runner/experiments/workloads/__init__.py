"""What a cell sends: the seeded, unbounded prompt stream of a workload (`workload.py`),
its length distributions (`lengths.py`), arrival schedules (`arrivals.py`) and request
datasets (`datasets.py`, and `make_dataset.py` that writes the shipped one). Nothing here
runs a runtime or touches the store.
"""

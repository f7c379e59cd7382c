"""How checkpoints are made: the shipped tiny model's recipe and random test checkpoints."""

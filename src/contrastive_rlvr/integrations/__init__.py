"""Bridges from the algorithm core to training engines other than TRL (verl)."""

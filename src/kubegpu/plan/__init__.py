"""Sharing plans: the seed's judgement (exclusive, MIG, time-slicing, MPS) as a tool."""

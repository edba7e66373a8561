"""The offline proposer: seeds translated from the reference, and a tuner that mutates launch configurations."""

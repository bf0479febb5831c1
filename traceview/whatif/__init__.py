"""What if: the step time, MFU and memory per chip of other meshes, batches, chip counts and chips, projected
from one measured training step with the book's models (docs/whatif.md)."""

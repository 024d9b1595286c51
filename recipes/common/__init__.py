"""What the recipes share: corpus folders, the precision probe, learning curves, the run records' collector and
repeated runs of a job from fresh clones."""

"""What the recipes share: corpus folders, the precision probe, learning curves and the run records' collector."""

"""Analysis: the counting memory model, tiling, closed forms, GPU specs, roofline, CLI and plots."""

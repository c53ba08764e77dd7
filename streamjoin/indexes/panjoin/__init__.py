"""PanJoin (Pan & Jacobsen): BI-Sort, RaP-Table with its LLAT, WiB+-Tree, and the chain of subwindows they live in."""

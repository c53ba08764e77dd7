"""SPO-Join (Aslam, Simonini & Beedkar): the PO-Join index, its mutable part, the IE-Join runs and the bit sets."""

"""PIM-Tree (Shahvarani & Jacobsen): the B+-tree, the chained index, the CSS-tree, IM-Tree and PIM-Tree, and the forms the shared-index core's threads share."""

"""Inside bwrap: `_enter`, the Landlock layer and, under brokered, the command server."""

"""Inside bwrap: the inner stage (`_enter`; enter.c at standard), the Landlock layer and,
under brokered, the command server."""

"""The exact engine: correctly rounded values by exact rational and decimal arithmetic,
standard library only.  The python backend and the references every kernel is checked
against are built from it."""

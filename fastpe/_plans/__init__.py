"""Kernel constants, one module per family: the frequencies and their split words, the
column layouts, the polynomial coefficients.  What the backends and the public layer share."""

"""The version, in one place (the package, the CLI and the files it writes read it here)."""

__version__ = "0.1.0"

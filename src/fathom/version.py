"""fathom's version, apart from the package's __init__ so that modules import it without the public API."""

__version__ = "0.1.0"

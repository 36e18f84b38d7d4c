"""The package's version, here so that the core (metrics names its meter
with it) never imports the package's top module."""

__version__ = "0.1.0"

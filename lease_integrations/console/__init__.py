"""The operator's console behind ``leasectl``: one module per command group,
plus the rendering they share. ``lease_integrations.cli`` is the entry point."""

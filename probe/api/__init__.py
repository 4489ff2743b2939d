"""What a user calls: probe.analyze, the options, the commands (probe analyze | compare |
report | check | train | graft), and what every command shares: errors, console, outputs."""

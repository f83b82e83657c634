"""CLI sub-commands, one module per area; each lists its commands in COMMANDS (see cli_app)."""

"""CLI sub-commands, one module per area; each lists its commands in COMMANDS (cli_app adds them)."""

-- Lint settings for the Neovim plugin (luacheck; run by scripts/test.sh).
std = 'luajit'
globals = { 'vim' }
max_line_length = 120

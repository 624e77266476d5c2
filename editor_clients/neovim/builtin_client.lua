-- specls through Neovim's own LSP client (Neovim 0.12+), without setting up the specls plugin. Put this in
-- your init.lua, with editor_clients/neovim on the runtime path for the accept helper it uses.
-- tests/e2e/test_neovim_builtin.py runs this very file.
vim.lsp.config('specls', {
  cmd = { 'specls', 'serve' },
  filetypes = { 'python', 'lua', 'rust', 'go', 'javascript', 'typescript' },
  root_markers = { '.git' },
  init_options = { maxLines = 4 }, -- server settings, as in editor_clients/README.md
})
vim.lsp.enable('specls')
vim.lsp.inline_completion.enable()

-- Neovim keeps showing the last suggestion while you type through it; `insert_what_is_shown` inserts
-- what is shown (the part after the typed text), not the whole suggestion where it was made.
local insert_what_is_shown = require('specls.builtin').insert_what_is_shown

vim.keymap.set('i', '<Tab>', function()
  if not vim.lsp.inline_completion.get({ on_accept = insert_what_is_shown }) then
    return '<Tab>'
  end
end, { expr = true, desc = 'accept the specls suggestion' })

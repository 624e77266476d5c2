-- specls through Neovim's own LSP client (Neovim 0.12+), without the specls plugin. Put this in your
-- init.lua. tests/e2e/test_neovim_builtin.py runs this very file.
vim.lsp.config('specls', {
  cmd = { 'specls', 'serve' },
  filetypes = { 'python', 'lua', 'rust', 'go', 'javascript', 'typescript' },
  root_markers = { '.git' },
  init_options = { maxLines = 4 }, -- server settings, as in editor_clients/README.md
})
vim.lsp.enable('specls')
vim.lsp.inline_completion.enable()

-- Neovim asks 200 ms after you stop typing and keeps showing the last suggestion while you type through
-- it. Accepted before the new answer arrives, it would be inserted where it was made for, in front of
-- what you typed since. This inserts what is shown: the part of the suggestion after the typed text.
local function insert_what_is_shown(item)
  local text = type(item.insert_text) == 'string' and item.insert_text or item.insert_text.value
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  local start = item.range and item.range.start
  if start and start.row == row - 1 and start.col <= col then
    text = text:sub(col - start.col + 1)
  end
  local lines = vim.split(text, '\n', { plain = true })
  vim.api.nvim_buf_set_text(0, row - 1, col, row - 1, col, lines)
  vim.api.nvim_win_set_cursor(0, { row + #lines - 1, (#lines == 1 and col or 0) + #lines[#lines] })
  if item.command then -- counts the accept in specls' local statistics
    vim.lsp.get_client_by_id(item.client_id):exec_cmd(item.command)
  end
end

vim.keymap.set('i', '<Tab>', function()
  if not vim.lsp.inline_completion.get({ on_accept = insert_what_is_shown }) then
    return '<Tab>'
  end
end, { expr = true, desc = 'accept the specls suggestion' })

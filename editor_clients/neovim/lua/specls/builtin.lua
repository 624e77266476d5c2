-- Neovim's own inline completion (0.12+) as the plugin uses it: what it draws, and accepting it.
-- `insert_what_is_shown` is also the accept of the set-up without the plugin (builtin_client.lua).
local ghost = require('specls.ghost')

local M = {}

local namespace = vim.api.nvim_create_namespace('nvim.lsp.inline_completion')

--- The ghost text Neovim draws in `bufnr`, as {row, col, text}.
function M.ghost_text(bufnr)
  return ghost.get(bufnr, namespace)
end

--- Insert what Neovim shows of `item`: the part after the text typed since the item was made. Neovim keeps
--- showing an item while you type through it and asks again only 200 ms after the last key; its own
--- accept would insert the item where it was made, in front of the typed text.
function M.insert_what_is_shown(item)
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

function M.accept()
  return vim.lsp.inline_completion.get({ on_accept = M.insert_what_is_shown })
end

return M

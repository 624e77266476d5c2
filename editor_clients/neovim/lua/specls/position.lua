-- Column conversions between Neovim byte columns and LSP character offsets (utf-8/16/32), working on
-- Neovim 0.7 (vim.str_utfindex(s, i) -> utf32, utf16) and 0.11+ (vim.str_utfindex(s, encoding, i)).
local M = {}

local new_api = vim.fn.has('nvim-0.11') == 1

--- LSP character offset of byte column `col` (0-based) in `line`.
---@param line string
---@param col integer
---@param encoding 'utf-8'|'utf-16'|'utf-32'
---@return integer
function M.to_lsp(line, col, encoding)
  col = math.min(col, #line)
  if encoding == 'utf-8' then
    return col
  end
  if new_api then
    return vim.str_utfindex(line, encoding, col, false)
  end
  local utf32, utf16 = vim.str_utfindex(line, col)
  return encoding == 'utf-32' and utf32 or utf16
end

--- Byte column (0-based) of LSP character offset `character` in `line`; past the end clamps to the end.
---@param line string
---@param character integer
---@param encoding 'utf-8'|'utf-16'|'utf-32'
---@return integer
function M.from_lsp(line, character, encoding)
  if encoding == 'utf-8' then
    return math.min(character, #line)
  end
  if new_api then
    return vim.str_byteindex(line, encoding, character, false)
  end
  local ok, col = pcall(vim.str_byteindex, line, character, encoding ~= 'utf-32')
  return ok and col or #line
end

--- Text position params for the cursor of window `win` (0 = current) in `encoding`.
---@param bufnr integer
---@param win integer
---@param encoding 'utf-8'|'utf-16'|'utf-32'
---@return lsp.TextDocumentPositionParams
function M.cursor_params(bufnr, win, encoding)
  local row, col = unpack(vim.api.nvim_win_get_cursor(win))
  local line = vim.api.nvim_buf_get_lines(bufnr, row - 1, row, false)[1] or ''
  return {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = { line = row - 1, character = M.to_lsp(line, col, encoding) },
  }
end

return M

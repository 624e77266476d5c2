-- Ghost text with extmarks. The first line is drawn at the cursor: `inline` virtual text where Neovim has
-- it (0.10+); on older versions an overlay of the suggestion followed by the rest of the line, which looks
-- the same. The other lines are virtual lines below the cursor line.
local M = {}

M.ns = vim.api.nvim_create_namespace('specls_ghost')
local has_inline = vim.fn.has('nvim-0.10') == 1

--- Draw `text` as ghost text at (row, col) (0-based, byte column). Returns the extmark id.
---@param bufnr integer
---@param row integer
---@param col integer
---@param text string
---@param hl_group string
---@return integer
function M.show(bufnr, row, col, text, hl_group)
  M.clear(bufnr)
  local lines = vim.split(text, '\n', { plain = true })
  local first = table.remove(lines, 1)
  local opts = { hl_mode = 'combine', priority = 200 }
  if #lines > 0 then
    opts.virt_lines = {}
    for _, line in ipairs(lines) do
      table.insert(opts.virt_lines, { { line, hl_group } })
    end
  end
  if first ~= '' then
    if has_inline then
      opts.virt_text = { { first, hl_group } }
      opts.virt_text_pos = 'inline'
    else
      local current = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
      local rest = current:sub(col + 1)
      opts.virt_text = { { first, hl_group } }
      if rest ~= '' then
        table.insert(opts.virt_text, { rest, 'Normal' })
      end
      opts.virt_text_pos = 'overlay'
    end
  end
  return vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, opts)
end

---@param bufnr integer
function M.clear(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

--- The ghost text currently drawn in `bufnr` (by the plugin, or in namespace `ns`), as {row, col, text}.
---@param bufnr integer
---@param ns integer?
---@return { row: integer, col: integer, text: string }?
function M.get(bufnr, ns)
  local marks = vim.api.nvim_buf_get_extmarks(bufnr, ns or M.ns, 0, -1, { details = true })
  local mark = marks[1]
  if not mark then
    return nil
  end
  local details = mark[4]
  local parts = {}
  local first = details.virt_text and details.virt_text[1] and details.virt_text[1][1] or ''
  table.insert(parts, first)
  for _, line in ipairs(details.virt_lines or {}) do
    table.insert(parts, line[1][1])
  end
  return { row = mark[2], col = mark[3], text = table.concat(parts, '\n') }
end

return M

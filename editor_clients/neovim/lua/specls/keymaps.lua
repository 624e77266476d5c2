-- Insert-mode keys. Each falls back to its own key when there is nothing to act on, so Tab still
-- indents when no suggestion is shown.
local M = {}

local descriptions = {
  accept = 'specls: accept the suggestion',
  accept_word = 'specls: accept the next word of the suggestion',
  accept_line = 'specls: accept the next line of the suggestion',
  dismiss = 'specls: dismiss the suggestion',
}

---@param lhs string
local function feed(lhs)
  -- 'n': the key's built-in meaning, not this mapping again.
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(lhs, true, false, true), 'n', false)
end

--- Map each configured key to `actions[name]()`, which returns true when it did something.
---@param keymaps specls.Keymaps
---@param actions table<string, fun(): boolean>
function M.setup(keymaps, actions)
  for name, lhs in pairs(keymaps) do
    if lhs then
      vim.keymap.set('i', lhs, function()
        if not actions[name]() then
          feed(lhs)
        end
      end, { desc = descriptions[name], silent = true })
    end
  end
end

return M

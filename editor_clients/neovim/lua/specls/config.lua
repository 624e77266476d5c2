-- Defaults and validation for require('specls').setup{...}. A bad value falls back to its default with a
-- warning, so one typo never disables the plugin.
local M = {}

---@class specls.Keymaps
---@field accept string|false
---@field accept_word string|false
---@field accept_line string|false
---@field dismiss string|false

---@class specls.Config
---@field cmd string[] how to start the server
---@field settings table<string, any> server settings, sent as initializationOptions
---@field filetypes string[]? nil: every normal file buffer
---@field auto_trigger boolean
---@field debounce_ms integer
---@field keymaps specls.Keymaps
---@field hl_group string
---@field use_builtin boolean|'auto'
---@field tcp specls.Tcp? connect to a running `specls serve --tcp` instead of starting one

---@class specls.Tcp
---@field host string
---@field port integer
---@field token_file string? nil: the server's default file for the port

---@type specls.Config
M.defaults = {
  -- How to start the server; `specls serve` reads everything else from `settings`.
  cmd = { 'specls', 'serve' },
  -- Server settings, sent as initializationOptions (camelCase, as in the server's docs):
  -- backend, target, draft, device, endpoint, remoteModel, maxNewTokens, temperature, maxLines, ...
  settings = {},
  -- File types to attach to; nil means every normal file buffer.
  filetypes = nil,
  -- Ask for a suggestion after each change in insert mode.
  auto_trigger = true,
  -- Wait this long after the last keystroke before asking (the server also debounces: debounceMs).
  debounce_ms = 0,
  -- Insert-mode keys; false disables one. Accept falls back to the key itself when nothing is shown.
  keymaps = {
    accept = '<Tab>',
    accept_word = '<M-Right>',
    accept_line = '<M-Down>',
    dismiss = '<C-]>',
  },
  -- Highlight group of the ghost text (defined as a link to Comment unless you define it).
  hl_group = 'SpeclsGhostText',
  -- Use Neovim's own vim.lsp.inline_completion (0.12+) when it exists: 'auto', true or false.
  -- The built-in client accepts whole suggestions only; accept word/line need false.
  use_builtin = 'auto',
  -- tcp = { host = '127.0.0.1', port = 2087, token_file = nil }: connect to `specls serve --tcp` (Neovim
  -- 0.8+) and send its token (read from token_file, else the server's default file for the port).
  tcp = nil,
}

local expected = {
  cmd = 'table',
  settings = 'table',
  filetypes = 'table',
  auto_trigger = 'boolean',
  debounce_ms = 'number',
  keymaps = 'table',
  hl_group = 'string',
}

---@generic T
---@param value T
---@return T
local function copy(value)
  return type(value) == 'table' and vim.deepcopy(value) or value
end

--- Merge `user` over the defaults. Returns the config and a list of problems (each already fixed).
---@param user table?
---@return specls.Config config
---@return string[] problems
function M.resolve(user)
  local config = vim.deepcopy(M.defaults)
  local problems = {}
  if user == nil then
    return config, problems
  end
  if type(user) ~= 'table' then
    return config, { 'setup() expects a table, got ' .. type(user) }
  end
  for key, value in pairs(user) do
    if M.defaults[key] == nil and key ~= 'filetypes' and key ~= 'tcp' then
      table.insert(problems, ('unknown option %q ignored'):format(key))
    elseif key == 'tcp' then
      if
        type(value) == 'table'
        and type(value.port) == 'number'
        and (value.host == nil or type(value.host) == 'string')
        and (value.token_file == nil or type(value.token_file) == 'string')
      then
        config.tcp = { host = value.host or '127.0.0.1', port = value.port, token_file = value.token_file }
      else
        table.insert(problems, 'tcp must be { host = "127.0.0.1", port = 2087, token_file = nil }; ignored')
      end
    elseif key == 'use_builtin' then
      if value == 'auto' or type(value) == 'boolean' then
        config.use_builtin = value
      else
        table.insert(problems, "use_builtin must be 'auto', true or false")
      end
    elseif type(value) ~= expected[key] then
      table.insert(problems, ('option %q must be a %s, got %s; default kept'):format(key, expected[key], type(value)))
    elseif key == 'keymaps' then
      for name, lhs in pairs(value) do
        if M.defaults.keymaps[name] == nil then
          table.insert(problems, ('unknown keymap %q ignored'):format(name))
        elseif lhs == false or type(lhs) == 'string' then
          config.keymaps[name] = lhs
        else
          table.insert(problems, ('keymap %q must be a key string or false'):format(name))
        end
      end
    elseif key == 'cmd' and (#value == 0 or type(value[1]) ~= 'string') then
      table.insert(problems, 'cmd must be a list like { "specls", "serve" }; default kept')
    elseif key == 'debounce_ms' and value < 0 then
      table.insert(problems, 'debounce_ms must be 0 or more; default kept')
    else
      config[key] = copy(value)
    end
  end
  return config, problems
end

--- Whether Neovim's built-in inline completion should draw and accept suggestions.
---@param config specls.Config
---@return boolean
function M.builtin_enabled(config)
  local available = vim.lsp.inline_completion ~= nil
  if config.use_builtin == 'auto' then
    return available
  end
  return config.use_builtin == true and available
end

return M

-- specls for Neovim: ghost-text completions from the specls language server.
--   require('specls').setup{ settings = { device = 'cpu' } }
local builtin_completion = require('specls.builtin')
local completion = require('specls.completion')
local config_mod = require('specls.config')
local ghost = require('specls.ghost')
local keymaps = require('specls.keymaps')
local server = require('specls.server')

---@class specls
---@field config specls.Config?
local M = { config = nil }

---@param bufnr integer
---@param config specls.Config
---@return boolean
local function wanted(bufnr, config)
  if vim.bo[bufnr].buftype ~= '' or vim.api.nvim_buf_get_name(bufnr) == '' and vim.bo[bufnr].filetype == '' then
    return false
  end
  return config.filetypes == nil or vim.tbl_contains(config.filetypes, vim.bo[bufnr].filetype)
end

---@return boolean?
local function builtin()
  return M.config and config_mod.builtin_enabled(M.config)
end

---@param bufnr integer
local function trigger(bufnr)
  if M.config.debounce_ms > 0 then
    vim.defer_fn(function()
      if vim.api.nvim_get_current_buf() == bufnr then
        completion.request(bufnr)
      end
    end, M.config.debounce_ms)
  else
    completion.request(bufnr)
  end
end

---@param bufnr integer
local function on_attach(_, bufnr)
  if builtin() then
    vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
  end
end

---@param group integer
local function buffer_autocmds(group)
  local function current()
    return vim.api.nvim_get_current_buf()
  end
  vim.api.nvim_create_autocmd('TextChangedI', {
    group = group,
    callback = function()
      if builtin() or not server.client() then
        return
      end
      local bufnr = current()
      if completion.on_text_changed(bufnr) and M.config.auto_trigger then
        trigger(bufnr)
      end
    end,
  })
  vim.api.nvim_create_autocmd('CursorMovedI', {
    group = group,
    callback = function()
      completion.on_cursor_moved(current())
    end,
  })
  vim.api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, {
    group = group,
    callback = function()
      completion.cancel(current())
      completion.dismiss(current(), completion.current(current()) ~= nil)
    end,
  })
  -- Where the user is, once the cursor rests: the server warms its cache for the next request there.
  vim.api.nvim_create_autocmd({ 'BufEnter', 'CursorHold' }, {
    group = group,
    callback = function(args)
      completion.report_cursor(args.buf)
    end,
  })
  vim.api.nvim_create_autocmd('CursorMoved', {
    group = group,
    callback = function(args)
      completion.report_cursor_soon(args.buf)
    end,
  })
  vim.api.nvim_create_autocmd('BufUnload', {
    group = group,
    callback = function(args)
      completion.forget(args.buf)
    end,
  })
end

---@param opts specls.Config|table|nil
function M.setup(opts)
  local config, problems = config_mod.resolve(opts)
  for _, problem in ipairs(problems) do
    vim.notify('specls: ' .. problem, vim.log.levels.WARN)
  end
  M.config = config
  completion.hl_group = config.hl_group
  vim.api.nvim_set_hl(0, 'SpeclsGhostText', { link = 'Comment', default = true })
  server.configure(config, on_attach)
  server.on_grown = completion.on_grown
  server.on_ready = function()
    completion.report_cursor(vim.api.nvim_get_current_buf())
  end

  local group = vim.api.nvim_create_augroup('specls', { clear = true })
  vim.api.nvim_create_autocmd({ 'BufEnter', 'FileType' }, {
    group = group,
    callback = function(args)
      if wanted(args.buf, config) then
        server.attach(args.buf)
      end
    end,
  })
  buffer_autocmds(group)
  keymaps.setup(config.keymaps, {
    accept = M.accept,
    accept_word = M.accept_word,
    accept_line = M.accept_line,
    dismiss = M.dismiss,
  })
  vim.api.nvim_create_user_command('SpeclsRestart', function()
    server.restart()
  end, {})
  vim.api.nvim_create_user_command('SpeclsStatus', function()
    print(M.status())
  end, {})
  vim.api.nvim_create_user_command('SpeclsStats', function()
    M.stats()
  end, {})
  if wanted(vim.api.nvim_get_current_buf(), config) then
    server.attach(vim.api.nvim_get_current_buf())
  end
end

--- Accept the whole suggestion; false when none is shown.
---@return boolean
function M.accept()
  if builtin() then
    return builtin_completion.accept()
  end
  return completion.accept(vim.api.nvim_get_current_buf(), 'all')
end

---@return boolean
function M.accept_word()
  return not builtin() and completion.accept(vim.api.nvim_get_current_buf(), 'word')
end

---@return boolean
function M.accept_line()
  return not builtin() and completion.accept(vim.api.nvim_get_current_buf(), 'line')
end

---@return boolean
function M.dismiss()
  local bufnr = vim.api.nvim_get_current_buf()
  if builtin() or not completion.current(bufnr) then
    return false
  end
  completion.cancel(bufnr)
  completion.dismiss(bufnr, true)
  return true
end

--- A short status for a statusline: "specls ready 42ms 63%", "specls generating", "specls warming 40%",
--- "specls loading", "specls error: ..." (also the last failed completion). Use it as
--- `vim.o.statusline = "%f %=%{v:lua.require'specls'.status()}"`.
---@return string
function M.status()
  local s = server.status or {}
  local state = s.state or 'stopped'
  if state == 'ready' and s.generating == true then
    state = 'generating'
  elseif state == 'ready' and type(s.warmCached) == 'number' and s.warmCached < 1 then
    state = ('warming %d%%'):format(math.floor(s.warmCached * 100 + 0.5))
  end
  local parts = { 'specls', state }
  if s.state == 'error' and type(s.message) == 'string' then
    table.insert(parts, s.message)
  elseif type(s.lastError) == 'string' then
    table.insert(parts, '(' .. s.lastError .. ')')
  end
  if type(s.lastLatencyMs) == 'number' then
    table.insert(parts, ('%dms'):format(math.floor(s.lastLatencyMs + 0.5)))
  end
  if type(s.acceptanceRate) == 'number' then
    table.insert(parts, ('%d%%'):format(math.floor(s.acceptanceRate * 100 + 0.5)))
  end
  return table.concat(parts, ' ')
end

--- Show the server's local statistics (specls/stats) in a message.
function M.stats()
  local client = server.client()
  if not client then
    vim.notify('specls: the server is not running', vim.log.levels.WARN)
    return
  end
  client.request('specls/stats', {}, function(err, result)
    vim.notify(err and ('specls: ' .. err.message) or vim.inspect(result))
  end, vim.api.nvim_get_current_buf())
end

--- The ghost text shown in `bufnr`, as {row, col, text}, whoever draws it.
function M.ghost_text(bufnr)
  return builtin() and builtin_completion.ghost_text(bufnr) or ghost.get(bufnr)
end

return M

-- An account created by someone else for a user it invites starts 'invited': no signup is
-- queued for it (the activation email is for accounts that signed up themselves, inserted
-- 'provisioned'), the application requests its invitation (mailroom.request(account,
-- 'invitation')), and consuming the invitation's token makes it 'active'
-- (trg_after_token_consumed). A migration of its own: a new enum value can be used only once
-- the transaction that added it has committed (0033 names it).
ALTER TYPE account_status ADD VALUE IF NOT EXISTS 'invited';

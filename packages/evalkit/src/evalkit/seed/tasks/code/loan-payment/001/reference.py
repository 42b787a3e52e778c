def monthly_payment(principal, annual_rate_percent, months):
    r = annual_rate_percent / 100 / 12
    if r == 0:
        return principal / months
    return principal * r / (1 - (1 + r) ** -months)
